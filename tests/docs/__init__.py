"""The README and `docs/`: examples, public names, the module graph, no development history."""
