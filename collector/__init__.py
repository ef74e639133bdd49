"""Everything that touches the machine: discovery, sources, the sampler, the ring, recording."""
