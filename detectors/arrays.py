"""The numpy array types every layer annotates with, defined once."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]  # timestamps, byte counts, durations, indices into bins
U64 = npt.NDArray[np.uint64]  # raw cumulative counter readings, as the ring holds them
F64 = npt.NDArray[np.float64]  # utilizations and rates
U8 = npt.NDArray[np.uint8]  # packet bytes and header fields
B = npt.NDArray[np.bool_]  # one flag per sample or packet
