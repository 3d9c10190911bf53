"""Study families: each subpackage is one family — the kinds, statistics, prompts, tools and
command that only its studies use — registered by its ``register()`` through
:mod:`biasim.registry` (``FAMILIES``) and loaded when a study naming it (``family: NAME``) is
loaded. Families stand above every generic layer: none of those imports a family
(docs/extending/families.md, ``[tool.importlinter]`` in pyproject.toml)."""
