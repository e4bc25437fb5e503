import copy
from datetime import datetime

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from rest_framework import serializers

from apps.accounts.models import ApiToken, AuditLogEntry, User, scope_problem
from apps.accounts.roles import Role
from apps.core.api.serializers import ModelSerializer


class UserSerializer(ModelSerializer):
    password = serializers.CharField(write_only=True, required=False, style={"input_type": "password"})
    effective_role = serializers.CharField(read_only=True, allow_null=True)

    class Meta:
        model = User
        fields = [
            "id",
            "username",
            "email",
            "first_name",
            "last_name",
            "role",
            "effective_role",
            "is_active",
            "is_superuser",
            "last_login",
            "date_joined",
            "password",
        ]
        read_only_fields = ["is_superuser", "last_login", "date_joined"]

    def validate(self, attrs: dict) -> dict:
        password = attrs.get("password")
        if password:
            # Checked against the account as it will be, so "similar to the username" catches a new user too.
            candidate = copy.copy(self.instance) if self.instance else User()
            for name, value in attrs.items():
                if name != "password":
                    setattr(candidate, name, value)
            try:
                validate_password(password, candidate)
            except DjangoValidationError as exc:
                raise serializers.ValidationError({"password": exc.messages}) from exc
        return attrs

    def create(self, validated: dict) -> User:
        password = validated.pop("password", None)
        user = User(**validated)
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()  # an account for automation: it signs in with tokens only
        user.save()
        return user

    def update(self, user: User, validated: dict) -> User:
        password = validated.pop("password", None)
        user = super().update(user, validated)
        if password:
            user.set_password(password)
            user.save(update_fields=["password"])
        return user


class MeSerializer(serializers.ModelSerializer):
    effective_role = serializers.SerializerMethodField()

    class Meta:
        model = User
        fields = ["id", "username", "email", "role", "effective_role"]

    def get_effective_role(self, user: User) -> str | None:
        return self.context.get("effective_role", user.effective_role)


class ApiTokenSerializer(ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    user = serializers.PrimaryKeyRelatedField(
        queryset=User.objects.all(), required=False, help_text="Owner; defaults to the caller."
    )
    is_usable = serializers.BooleanField(read_only=True)
    key_prefix = serializers.SerializerMethodField(help_text="How the token starts, to tell tokens apart.")

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "user",
            "username",
            "role",
            "key_prefix",
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
            "last_used_ip",
            "is_usable",
        ]
        read_only_fields = ["created_at", "revoked_at", "last_used_at", "last_used_ip"]
        extra_kwargs = {"role": {"default": Role.VIEWER}}
        # DRF would make ``user`` required for the (user, name) unique constraint; validate() checks it
        # once the owner is known, with a message that names the token.
        validators: list = []

    def get_key_prefix(self, token: ApiToken) -> str:
        return f"cpt_{token.key_id}_"

    def validate_expires_at(self, value: datetime | None) -> datetime | None:
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("The expiry must be in the future.")
        return value

    def validate(self, attrs: dict) -> dict:
        owner = attrs.get("user") or self.context["request"].user
        problem = scope_problem(attrs["role"], owner)
        if problem:
            raise serializers.ValidationError({"role": problem})
        if ApiToken.objects.filter(user=owner, name=attrs["name"]).exists():
            raise serializers.ValidationError(
                {"name": f"{owner.username} already has a token named {attrs['name']!r}."}
            )
        attrs["user"] = owner
        return attrs


class IssuedApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The secret. Shown once, now; store it safely.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


class AuditLogEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditLogEntry
        fields = [
            "id",
            "timestamp",
            "actor",
            "user",
            "token",
            "action",
            "method",
            "path",
            "status_code",
            "object_type",
            "object_id",
            "object_repr",
            "detail",
            "remote_addr",
            "user_agent",
            "count",
            "last_at",
        ]
