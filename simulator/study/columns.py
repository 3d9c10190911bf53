"""Results-table column names, defined once: the schema reserves them, the model fills them."""

ID_COLUMNS = (
    "unit_id",
    "agent_id",
    "stage",
    "role",
    "backend",
    "model",
    "model_label",
    "synthetic",
    "condition",
    "replicate",
    "agent_index",
)
CALL_COLUMNS = (
    "persona_name",
    "status",
    "valid",
    "raw_text",
    "error",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "attempts",
    "reasks",
    "truncated",
    "cached",
)
#: Columns of studies with populations: who acted, and what each reading showed and advanced.
PIPELINE_COLUMNS = (
    "population",
    "evaluation",
    "cluster",
    "reads",
    "shown",
    "variant",
    "advanced",
    "selected",
)
#: Columns of committee stages (:mod:`.committees`): a member's row names the stage it reads
#: for (`committee`); the stage's decided row names its members' units (`members`) and, under a
#: selection rule, the pool's own decision before the rule (`pool_advanced`).
COMMITTEE_COLUMNS = ("committee", "members", "pool_advanced")
#: Columns of word-pairing stages: what each call showed, in the order shown.
PAIRING_COLUMNS = ("targets", "target_values", "items")
#: Columns of a counterfactual stage's rows (:mod:`.counterfactual`): the set, the value each
#: call carries and the writer.
COUNTERFACTUAL_COLUMNS = ("cf_set", "cf_swap", "cf_writer")
#: Names a study may not use for axes, variables or output fields: results columns and the
#: names templates already give a meaning to.
RESERVED = frozenset(
    (
        *ID_COLUMNS,
        *CALL_COLUMNS,
        *PIPELINE_COLUMNS,
        *COMMITTEE_COLUMNS,
        *PAIRING_COLUMNS,
        *COUNTERFACTUAL_COLUMNS,
        "persona",
        "outputs",
        "vars",
        "documents",
        "document",
        "select",
        "pool_size",
        "probabilities",
    )
)
