"""The size of the transformers models the benchmarks build from a config: BERT-mini (4 layers of
width 256), large enough for timings to mean something, built in seconds, never downloaded."""

BERT_MINI = {"hidden_size": 256, "layers": 4, "intermediate_size": 1024}
