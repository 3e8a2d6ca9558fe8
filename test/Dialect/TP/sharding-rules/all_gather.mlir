// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Collectives change layouts, not values: every factor passes through.
tp.grid @g [2]
func.func @all_gather(%x: tensor<8x16xf32, #tp.dist<@g, [[0], []]>>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j]) -> ([i, j]) {i=8, j=16}
  %0 = tp.all_gather %x over @g {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<8x16xf32, #tp.dist<@g, [[0], []]>> -> tensor<8x16xf32>
  return
}
