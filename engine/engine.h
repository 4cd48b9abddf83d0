/*
 * engine.h - the day0 engine library: everything day0-engine's steps share.
 *
 * The engine is a static library (libday0engine.a) plus a thin main that
 * dispatches to one step per file (step_*.c), tmux-style: each step exports a
 * `const struct step_entry` and steps.c lists them.  Nothing in the library
 * prints and exits; functions return 0 / -1 and fill a `struct d0_err` whose
 * message names the file (and tensor) and what was expected.
 *
 * Pieces, one file each:
 *   util.c         errors, paths, small-file IO, atomic output directories
 *   dtype.c        safetensors dtypes, f32 <-> bf16/f16 conversion (RNE)
 *   safetensors.c  strict header parser and a streaming writer
 *   model.c        config.json families and the expected tensor table
 *   checkpoint.c   a Hugging Face checkpoint directory: index, shards, SUMS
 *   hash.c         SHA-256 of files (OpenSSL EVP), parallel over files
 *   layout.c       TP/PP/EP sharding rules and layout.json
 *   events.c       the --events JSON-lines emitter (ARCHITECTURE.md protocol)
 *   proto.c        the wire protocol: framing, tables, one envelope validator
 */
#ifndef DAY0_ENGINE_H
#define DAY0_ENGINE_H

/*
 * The umbrella for the steps.  Other modules include only the small headers
 * they use (util.h for errors and paths, proto.h for the wire protocol, ...),
 * so the Makefile's per-module include paths show the allowed arrows.
 */
#include "util.h"
#include "step.h"
#include "weights.h"
#include "model.h"
#include "runtime.h"
#include "inventory.h"
#include "events.h"
#include "proto.h"

#endif
