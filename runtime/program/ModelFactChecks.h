// The checks of a decode program that a model decides alone. A program states what it refuses
// (block-refinement decodes only block-causal models, low-confidence and entropy-bound refuse
// them) as `check` records over facts; where a check reads nothing but the model's facts and
// constants, no request can pass it on a model that fails it, so dlmc refuses the policy for
// that model when it compiles, with the program's own message: the rule is written once, in the
// program.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/program/DecodeProgram.h"
#include "runtime/sampling/Decoding.h"
#include "support/Status.h"

namespace dlm::program {

// The facts a decode program reads of the model `config` describes (its mask token, logit shift
// and attention block), as a session gives them to the interpreter.
StatusOr<sampling::TokenFacts> modelTokenFacts(const artifact::ModelConfig &config);

// Runs `program`'s leading scalar records (up to its first record of another kind) on what the
// model fixes: the facts mask, shift, vocab and attention_block, and constants. A value that
// depends on a knob, the prompt or the sequence stays unknown. Fails with the message of the
// first `check` whose condition is known and false.
Status checkModelFacts(const DecodeProgram &program, const sampling::TokenFacts &facts,
                       int64_t vocab);

} // namespace dlm::program
