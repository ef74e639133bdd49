"""Pure computation on timestamped counter samples: no I/O, no clock reads, no globals."""
