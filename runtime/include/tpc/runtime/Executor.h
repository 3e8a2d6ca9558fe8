// The exec layer: a rank's parameters (ParamStore.h), the KV caches
// (KvCaches.h) and the runner of one program (ProgramRunner.h).
#pragma once

#include "tpc/runtime/KvCaches.h"
#include "tpc/runtime/ParamStore.h"
#include "tpc/runtime/ProgramRunner.h"
