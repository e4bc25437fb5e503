from django.contrib.auth.password_validation import validate_password
from rest_framework import serializers

from apps.accounts.models import ApiToken, AuditLogEntry, User
from apps.accounts.roles import role_rank


class UserSerializer(serializers.ModelSerializer):
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

    def validate_password(self, value: str) -> str:
        validate_password(value, self.instance)
        return value

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


class ApiTokenSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    user = serializers.PrimaryKeyRelatedField(
        queryset=User.objects.all(), required=False, help_text="Owner; defaults to the caller."
    )
    is_usable = serializers.BooleanField(read_only=True)
    key_prefix = serializers.SerializerMethodField()

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

    def get_key_prefix(self, token: ApiToken) -> str:
        return f"cpt_{token.key_id}_"

    def validate(self, attrs: dict) -> dict:
        owner = attrs.get("user") or self.context["request"].user
        if role_rank(attrs.get("role", "viewer")) > role_rank(owner.effective_role):
            raise serializers.ValidationError(
                {"role": f"A token cannot have more rights than its owner ({owner.effective_role})."}
            )
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
        ]
