// A cluster description is checked field by field; every error names the
// file and the field in one line, and the pass fails.
// RUN: not tpc-opt %s --tp-simulate -o /dev/null 2>&1 | FileCheck %s --check-prefix=NONE
// NONE: error: tp-simulate: needs cluster=FILE, a cluster description (docs/simulator.md)
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.missing -o /dev/null 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: error: tp-simulate: {{.*}}.missing: cannot read: No such file or directory
// RUN: echo '{"name": "x",' > %t.truncated.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.truncated.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=JSON
// JSON: error: tp-simulate: {{.*}}.truncated.json: not JSON: [2:0, byte=14]: Expected object key
// RUN: sed 's/"f32": 1e9/"f32": -1/' %S/Inputs/clusters/unit.json > %t.negative.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.negative.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// NEGATIVE: error: tp-simulate: {{.*}}.negative.json: device.peak_flops.f32 must be positive, got -1.000000
// RUN: sed 's/"memory_bandwidth"/"memory_bandwith"/' %S/Inputs/clusters/unit.json > %t.misspelt.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.misspelt.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=MISSPELT
// MISSPELT: error: tp-simulate: {{.*}}.misspelt.json: device.memory_bandwith is not a field of the format
// RUN: sed 's/"ranks": 2/"ranks": 1/' %S/Inputs/clusters/unit.json > %t.ranks.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.ranks.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=RANKS
// RANKS: error: tp-simulate: {{.*}}.ranks.json: network[0].ranks must be a multiple of the inner level's 1 ranks, and larger
// RUN: sed 's/"half_flops": 4194304/"half_flops": "big"/' %S/Inputs/clusters/slow-gemm.json > %t.half.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.half.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=HALF
// HALF: error: tp-simulate: {{.*}}.half.json: device.gemm_efficiency.half_flops must be a non-negative number
// RUN: sed 's/"source"/"devices": 0, "source"/' %S/Inputs/clusters/unit.json > %t.devices.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.devices.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=DEVICES
// DEVICES: error: tp-simulate: {{.*}}.devices.json: devices must be a positive integer
// RUN: sed 's/"level": "node",/"level": "node", "links": 1,/' %S/Inputs/clusters/unit.json > %t.links.json
// RUN: not tpc-opt %s --tp-simulate=cluster=%t.links.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=LINKS
// LINKS: error: tp-simulate: {{.*}}.links.json: network[0].links is for a level with one inside it (the innermost level's links are its ranks')
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
