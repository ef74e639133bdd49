"""The test kit of tests/, bench/ and operators: emulated nodes, a fleet, the veth testbed."""
