import copy

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from rest_framework import serializers


class ValidatedModelSerializer(serializers.ModelSerializer):
    """Runs the model's own ``clean()`` too, so the API enforces what the admin enforces."""

    def validate(self, attrs: dict) -> dict:
        attrs = super().validate(attrs)
        model = self.Meta.model
        # A copy: the viewset reads the unchanged instance afterwards for the audit log's before/after.
        instance = copy.copy(self.instance) if self.instance else model()
        for name, value in attrs.items():
            if not isinstance(model._meta.get_field(name), models.ManyToManyRel | models.ManyToOneRel):
                setattr(instance, name, value)
        try:
            instance.clean()
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages) from exc
        return attrs
