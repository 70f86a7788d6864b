"""Schema definitions (SPEC §5): the supported JSON Schema subset, result validation,
and conversions between JSON Schema, the field form and sample results."""

from daemon.schemas.definition import check_definition, check_result

__all__ = ["check_definition", "check_result"]
