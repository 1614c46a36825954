"""Writes tests/data/python.safetensors with Python's `safetensors` (0.8.0, numpy and ml_dtypes
for bf16), the file tests/test_checkpoint.cpp expects kiln::save to reproduce byte for byte.
The values are ones the test recreates exactly: arange-based and exactly representable."""
import pathlib

import ml_dtypes
import numpy as np
from safetensors.numpy import save

tensors = {
    "w": (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3),
    "b": np.array([0.25, -3.0, 7.5], dtype=np.float32),
    "ids": np.array([3, -1, 0, 2147483647], dtype=np.int32),
    "h": np.array([[1.5, -2.0], [0.25, 3.0]], dtype=ml_dtypes.bfloat16),
    "g": np.array([0.5, -1.0, 65504.0], dtype=np.float16),
    "m": np.array([[True, False], [False, True]]),
    "s": np.array(3.5, dtype=np.float32),
    "e": np.zeros((0, 3), dtype=np.float32),
}
# One key: with two or more, Python's own order changes from run to run (a Rust HashMap).
metadata = {'quote"and\\slash': "line\nbreak \u00e9 \x01"}
out = pathlib.Path(__file__).with_name("python.safetensors")
out.write_bytes(save(tensors, metadata=metadata))
print(out, out.stat().st_size, "bytes")
