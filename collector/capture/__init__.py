"""RoCEv2 packet analysis: pcap records, a vectorized BTH decoder, per-QP statistics, coflows."""
