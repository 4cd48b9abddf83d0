/*
 * compat_min.c - THE table of minimum versions per model family
 * (compat.h; docs/compat.md lists it with the same sources).  One row per
 * (family, field); "*" rows hold for every family.  A node that reports
 * "none" for a field (no GPU: gpu_driver, gpu_runtime) is not held to it.
 * A new release's needs are one row here.
 */
#include "compat.h"

const struct compat_min compat_minimums[] = {
    /* What the engine calls, for every family. */
    {"*", "mpi_version", "1.8",
     "MPI-3.0 calls the engine makes (MPI_Comm_split_type, "
     "MPI_Get_library_version): Open MPI 1.8 is the first full MPI-3.0"},
    {"*", "engine_version", "0.1.0",
     "protocol 1, the one this console speaks"},
    /* bf16 weights on NVIDIA cards: CUDA 11.8 is the first with Hopper
     * (sm_90); its driver minimum is 520.61.05 (CUDA Toolkit release
     * notes, table 3). */
    {"*", "gpu_runtime", "11.8", "bf16 on Hopper needs CUDA 11.8"},
    {"*", "gpu_driver", "520.61.05",
     "CUDA 11.8's minimum Linux driver"},
    /* DeepSeek-V3 / Kimi-K2 ship block-scaled FP8 (e4m3): FP8 matmuls
     * came with CUDA 12.0 (cuBLASLt), whose driver minimum is 525.60.13. */
    {"deepseek_v3", "gpu_runtime", "12.0",
     "FP8 (e4m3) matmuls need CUDA 12.0"},
    {"deepseek_v3", "gpu_driver", "525.60.13",
     "CUDA 12.0's minimum Linux driver"},
};
const size_t compat_nminimums =
    sizeof compat_minimums / sizeof *compat_minimums;
