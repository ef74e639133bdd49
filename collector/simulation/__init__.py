"""A deterministic traffic model of one GPU node's NICs carrying LLM training, and its outputs."""
