"""Counter sources, one module each, behind one small protocol."""
