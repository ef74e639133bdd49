"""What the training stack writes about its collectives: NCCL Inspector dumps, PyTorch traces.

nccl_inspector.py reads the Inspector plugin's JSON dump files incrementally as they grow;
pytorch_trace.py reads a torch.profiler (Kineto) Chrome trace whole. Both give frozen
records with times on the Unix wall clock; which parallelism class a collective belongs to is
decided by detectors/collective_classes.py.
"""
