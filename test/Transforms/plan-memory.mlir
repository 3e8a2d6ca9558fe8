// RUN: tpc-opt %s -split-input-file --tp-plan-memory | FileCheck %s

// A chain of equal-sized values: each buffer dies when the next op has read
// it, so two slots of 4 KiB serve the whole chain.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: attributes {tp.arena_bytes = 8192 : i64}
// CHECK: tp.gelu %arg0 {tp.buffer_offsets = array<i64: [[A:[0-9]+]]>}
// CHECK: tp.silu %{{.*}} {tp.buffer_offsets = array<i64: [[B:[0-9]+]]>}
// CHECK: tp.gelu %{{.*}} {tp.buffer_offsets = array<i64: [[A]]>}
// CHECK: tp.silu %{{.*}} {tp.buffer_offsets = array<i64: [[B]]>}
func.func @chain(%x: tensor<32x32xf32>) -> tensor<32x32xf32> {
  %0 = tp.gelu %x : tensor<32x32xf32>
  %1 = tp.silu %0 : tensor<32x32xf32>
  %2 = tp.gelu %1 : tensor<32x32xf32>
  %3 = tp.silu %2 : tensor<32x32xf32>
  return %3 : tensor<32x32xf32>
}

// -----

// A value used again later (the residual %0) keeps its bytes until then; a
// reshape shares its input's buffer; a reshape of an argument aliases the
// argument (-1).
// CHECK-LABEL: func.func @residual
// CHECK-SAME: attributes {tp.arena_bytes = 12288 : i64}
// CHECK: %[[R0:.*]] = tp.gelu %arg0 {tp.buffer_offsets = array<i64: [[X:[0-9]+]]>}
// CHECK: tp.silu %[[R0]] {tp.buffer_offsets = array<i64: [[Y:[0-9]+]]>}
// CHECK: tp.gelu %{{.*}} {tp.buffer_offsets = array<i64: [[Z:[0-9]+]]>}
// CHECK: tp.reshape %{{.*}} {tp.buffer_offsets = array<i64: [[Z]]>}
// CHECK: tp.reshape %[[R0]] {tp.buffer_offsets = array<i64: [[X]]>}
// CHECK: tp.reshape %arg0 {tp.buffer_offsets = array<i64: -1>}
// Once %1 and then %0 are dead, the adds reuse their slots.
// CHECK: tp.add {{.*}} {tp.buffer_offsets = array<i64: [[Y]]>}
// CHECK: tp.add {{.*}} {tp.buffer_offsets = array<i64: [[X]]>}
func.func @residual(%x: tensor<32x32xf32>) -> tensor<1024xf32> {
  %0 = tp.gelu %x : tensor<32x32xf32>
  %1 = tp.silu %0 : tensor<32x32xf32>
  %2 = tp.gelu %1 : tensor<32x32xf32>
  %3 = tp.reshape %2 : (tensor<32x32xf32>) -> tensor<1024xf32>
  %4 = tp.reshape %0 : (tensor<32x32xf32>) -> tensor<1024xf32>
  %5 = tp.reshape %x : (tensor<32x32xf32>) -> tensor<1024xf32>
  %6 = tp.add %3, %4 : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
  %7 = tp.add %6, %5 : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
  return %7 : tensor<1024xf32>
}

// -----

// Larger buffers are placed first, each at the lowest aligned offset (here
// 256 bytes) free during its lifetime: all three are live at the add.
// RUN: tpc-opt %s -split-input-file --tp-plan-memory=alignment=256 | FileCheck %s --check-prefix=ALIGN
// ALIGN-LABEL: func.func @aligned
// ALIGN-SAME: attributes {tp.arena_bytes = 528 : i64}
// ALIGN: tp.reduce_sum %arg0 {dims = array<i64: 1>, tp.buffer_offsets = array<i64: 512>}
// ALIGN: tp.gelu %arg0 {tp.buffer_offsets = array<i64: 0>}
// ALIGN: tp.reshape %{{.*}} {tp.buffer_offsets = array<i64: 512>}
// ALIGN: tp.add {{.*}} {tp.buffer_offsets = array<i64: 256>}

// A non-power-of-two alignment is an error.
// RUN: not tpc-opt %s -split-input-file --tp-plan-memory=alignment=48 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: tp-plan-memory: alignment must be a power of two, got 48
func.func @aligned(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = tp.reduce_sum %x {dims = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  %1 = tp.gelu %x : tensor<4x8xf32>
  %2 = tp.reshape %0 : (tensor<4xf32>) -> tensor<4x1xf32>
  %3 = tp.add %1, %2 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}
