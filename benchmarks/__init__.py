"""Speed and memory benchmarks (`make bench`): a printed table and bench-results/bench.json."""
