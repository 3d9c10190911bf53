"""Persona attributes, name banks and persona construction."""

from .attributes import (
    Persona,
    attribute_combinations,
    attribute_key,
    build_personas,
    persona_keys,
)

__all__ = ["Persona", "attribute_combinations", "attribute_key", "build_personas", "persona_keys"]
