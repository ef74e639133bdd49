"""RoCEv2 capture: pcap and live records, a vectorized BTH decoder, glue to detectors/."""
