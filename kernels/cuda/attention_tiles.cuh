// The tiles and thread layout the CUDA attention kernels share
// (attention_cuda.cu, attention_block_cuda.cu): 64 queries x 64 keys in
// shared memory, 128 threads per block, 2 per tile row.
#pragma once

namespace trident::kernels::cuda {

constexpr int kTile = 64;      // queries and keys per tile
constexpr int kThreads = 128;  // 2 per tile row

}  // namespace trident::kernels::cuda
