// A cluster description is checked field by field; every error names the
// file and the field in one line, and the pass fails.
// RUN: not tpc-opt %s --tp-simulate -o /dev/null 2>&1 | FileCheck %s --check-prefix=NONE
// NONE: error: tp-simulate: needs cluster=FILE, a cluster description (docs/simulator.md)
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.missing -o /dev/null 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: error: tp-simulate: {{.*}}.missing: cannot open the cluster file: No such file or directory
// RUN: echo '{"name": "x",' > %t.truncated.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.truncated.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=BROKEN
// BROKEN: error: tp-simulate: {{.*}}.truncated.json: not JSON: [2:0, byte=14]: Expected object key
// RUN: sed 's/"f32": 1e9/"f32": -1/' %S/Inputs/clusters/unit.json > %t.negative.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.negative.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// NEGATIVE: error: tp-simulate: {{.*}}.negative.json: device.peak_flops.f32 must be between 1e+06 and 1e+19 FLOP/s, got -1

// Each number is bounded to a physical range: degenerate ones would have
// mode=auto choose a plan "at INF ms per step".
// RUN: sed 's/"f32": 1e9/"f32": 1e-308/' %S/Inputs/clusters/unit.json > %t.tiny.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.tiny.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=TINY
// TINY: error: tp-simulate: {{.*}}.tiny.json: device.peak_flops.f32 must be between 1e+06 and 1e+19 FLOP/s, got 1e-308
// RUN: sed 's/"bandwidth": 1e8/"bandwidth": 5e-324/' %S/Inputs/clusters/unit.json > %t.denormal.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.denormal.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=DENORMAL
// DENORMAL: error: tp-simulate: {{.*}}.denormal.json: network[1].bandwidth must be between 1000 and 1e+14 bytes/s, got 4.94066e-324
// RUN: sed 's/"latency": 1e-5/"latency": 1e300/' %S/Inputs/clusters/unit.json > %t.latency.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.latency.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=LATENCY
// LATENCY: error: tp-simulate: {{.*}}.latency.json: network[1].latency must be between 0 and 10 seconds, got 1e+300
// RUN: sed 's/"memory_bandwidth": 1e9/"memory_bandwidth": 1e9, "op_overhead_seconds": 1e300/' %S/Inputs/clusters/unit.json > %t.overhead.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.overhead.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=OVERHEAD
// OVERHEAD: error: tp-simulate: {{.*}}.overhead.json: device.op_overhead_seconds must be between 0 and 10 seconds, got 1e+300
// RUN: sed 's/"ranks": 2/"ranks": 99999999999/' %S/Inputs/clusters/unit.json > %t.huge.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.huge.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=HUGE
// HUGE: error: tp-simulate: {{.*}}.huge.json: network[0].ranks must be an integer between 1 and 16777216

// Reads are bounded, and so is nesting (llvm::json recurses per level).
// RUN: not tpc-opt %s --tp-simulate=cluster=/dev/zero -o /dev/null 2>&1 | FileCheck %s --check-prefix=ZERO
// ZERO: error: tp-simulate: /dev/zero: is larger than the 16777216 bytes a cluster file may have
// RUN: (printf '{"name": '; head -c 40000 /dev/zero | tr '\0' '[') > %t.deep.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.deep.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=DEEP
// DEEP: error: tp-simulate: {{.*}}.deep.json: not JSON: arrays and objects nest deeper than 512 levels (at byte 520)
// RUN: sed 's/"memory_bandwidth"/"memory_bandwith"/' %S/Inputs/clusters/unit.json > %t.misspelt.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.misspelt.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=MISSPELT
// MISSPELT: error: tp-simulate: {{.*}}.misspelt.json: device.memory_bandwith is not a field of the format
// RUN: sed 's/"ranks": 2/"ranks": 1/' %S/Inputs/clusters/unit.json > %t.ranks.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.ranks.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=RANKS
// RANKS: error: tp-simulate: {{.*}}.ranks.json: network[0].ranks must be a multiple of the inner level's 1 ranks, and larger
// RUN: sed 's/"half_flops": 4194304/"half_flops": "big"/' %S/Inputs/clusters/slow-gemm.json > %t.half.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.half.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=HALF
// HALF: error: tp-simulate: {{.*}}.half.json: device.gemm_efficiency.half_flops must be a number
// RUN: sed 's/"half_flops": 4194304/"half_flops": {"f32": 1, "fp8": 2}/' %S/Inputs/clusters/slow-gemm.json > %t.half-fp8.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.half-fp8.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=HALF-FP8
// HALF-FP8: error: tp-simulate: {{.*}}.half-fp8.json: device.gemm_efficiency.half_flops.fp8 is not a field of the format
// RUN: sed 's/"memory_bandwidth": 1e9/"memory_bandwidth": 1e9, "materialized_attention": {"forward_bytes_per_score": 13}/' %S/Inputs/clusters/unit.json > %t.scores.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.scores.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=SCORES
// SCORES: error: tp-simulate: {{.*}}.scores.json: device.materialized_attention.backward_bytes_per_score must be a number
// RUN: sed 's/"memory_bandwidth": 1e9/"memory_bandwidth": 1e9, "materialized_attention": {"forward_bytes_per_score": 13, "backward_bytes_per_score": 0}/' %S/Inputs/clusters/unit.json > %t.scores0.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.scores0.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=SCORES0
// SCORES0: error: tp-simulate: {{.*}}.scores0.json: device.materialized_attention.backward_bytes_per_score must be
// RUN: sed 's/"source"/"devices": 0, "source"/' %S/Inputs/clusters/unit.json > %t.devices.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.devices.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=DEVICES
// DEVICES: error: tp-simulate: {{.*}}.devices.json: devices must be an integer between 1 and 16777216
// RUN: sed 's/"memory_bandwidth": 1e9/"memory_bandwidth": 1e9, "cores": 0.5/' %S/Inputs/clusters/unit.json > %t.cores.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.cores.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=CORES
// CORES: error: tp-simulate: {{.*}}.cores.json: device.cores must be an integer between 1 and 16777216
// RUN: sed 's/"level": "node",/"level": "node", "links": 1,/' %S/Inputs/clusters/unit.json > %t.links.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.links.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=LINKS
// LINKS: error: tp-simulate: {{.*}}.links.json: network[0].links is for a level with one inside it (the innermost level's links are its ranks')
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
