// `linnet serve`'s life after its options (launcher/cmd_serve.cpp parses them and loads the
// model): world rank 0 answers HTTP; every step starts with its plan broadcast to every rank,
// each replica steps its engine (all its shards alike), and the replicas' leaders report back
// to rank 0. SIGTERM or SIGINT drains it: new requests get 503, those in progress finish.
#pragma once
#include <cstdint>

#include "parallel/control_channel.h"
#include "serve/http.h"
#include "serve/openai_api.h"
#include "serve/replica_engine.h"
#include "tokenizer/tokenizer.h"

namespace linnet::serve {

// The ranks as the loop sees them (the launcher's Ranks makes them).
struct ServeRanks {
  ControlChannel* world = nullptr;  // plans out from world rank 0, reports back to it
  int world_rank = 0, world_size = 1;
  bool replica_leader = true;  // shard 0 of its replica's stage 0: the one that reports
  int replicas = 1;
};

struct ServeOptions {
  HttpOptions http;
  int64_t max_waiting = 1024;    // jobs queued beyond those running; more: 503
  bool key_from_option = false;  // the start-up line says where the API key came from
  int64_t shards = 1;            // for the listening line
  int64_t stages = 1;            // pipeline stages (--pp), likewise
};

// On every rank, until drained; rethrows what stopped the engine (after waiting clients got
// it as their error). Rank 0 prints "linnet serve: listening on …" once it has bound.
void serve_until_drained(ReplicaEngine& engine, const Tokenizer& tok, const ServedModel& served,
                         const ServeOptions& options, const ServeRanks& ranks);

}  // namespace linnet::serve
