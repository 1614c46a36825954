"""Writes the .npy files tests/test_npy.cpp reads (numpy.save, numpy 2.4): arrays kiln::save_npy
must reproduce byte for byte, and NumPy's 64-bit defaults and a Fortran-ordered array that
kiln::load_npy must read. Values are exact in every dtype involved."""
import pathlib

import numpy as np

here = pathlib.Path(__file__).parent
arrays = {
    "f32_2x3": (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3),
    "i32_3": np.array([3, -1, 2147483647], dtype=np.int32),
    "f16_2": np.array([0.5, -65504.0], dtype=np.float16),
    "bool_2x2": np.array([[True, False], [False, True]]),
    "f32_scalar": np.array(3.5, dtype=np.float32),
    "f32_1x0": np.zeros((1, 0), dtype=np.float32),
    "f64_3": np.array([0.1, -2.0, 1e30]),
    "i64_2": np.array([7, -8], dtype=np.int64),
    "fortran_2x3": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
}
for name, a in arrays.items():
    np.save(here / f"npy_{name}.npy", a)
