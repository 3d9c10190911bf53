"""Persona attributes, name banks and persona construction."""

from biasim.personas.attributes import (
    Persona,
    attribute_combinations,
    attribute_key,
    build_personas,
    combination_count,
    distinct_personas,
    iter_personas,
    persona_keys,
)
from biasim.personas.namebank import NameBank, NameBankError, load_name_bank

__all__ = [
    "NameBank",
    "NameBankError",
    "Persona",
    "attribute_combinations",
    "attribute_key",
    "build_personas",
    "combination_count",
    "distinct_personas",
    "iter_personas",
    "load_name_bank",
    "persona_keys",
]
