"""The simulation engine and everything around it: study loading, LLM backends, analysis kinds,
reports, tools and the command line (see docs/architecture.md for the layers)."""
