import copy
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from rest_framework import serializers


class ChoiceField(serializers.ChoiceField):
    """A choice whose error lists the valid ones: ``"x" is not a valid choice; valid choices are: a, b.``"""

    def __init__(self, choices: Any, **kwargs: Any) -> None:
        super().__init__(choices, **kwargs)
        values = ", ".join(str(value).replace("{", "{{").replace("}", "}}") for value in self.choices)
        self.error_messages["invalid_choice"] = f'"{{input}}" is not a valid choice; valid choices are: {values}.'


class ModelSerializer(serializers.ModelSerializer):
    """The API's model serializer: a model field's choices come as a ChoiceField that lists them, and
    a field named in ``read_only_fields`` keeps its ``allow_blank`` (DRF drops it, and the schema then
    forbids the "" a response carries, e.g. the outcome of a burn-in not judged yet)."""

    serializer_choice_field = ChoiceField

    def include_extra_kwargs(self, kwargs: dict[str, Any], extra_kwargs: dict[str, Any]) -> dict[str, Any]:
        allow_blank = kwargs.get("allow_blank", False)
        kwargs = super().include_extra_kwargs(kwargs, extra_kwargs)
        if allow_blank and kwargs.get("read_only"):
            kwargs["allow_blank"] = True
        return kwargs


class ValidatedModelSerializer(ModelSerializer):
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
