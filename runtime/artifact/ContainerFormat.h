// The container both dlm files share (runtime/schema/artifact.fbs describes the layout): a
// size-prefixed flatbuffer, zero padding to a multiple of 64, then a weight section whose tensors
// each start at a multiple of 64. An artifact (.dlm, root Artifact) and a parameter file (.dlmp,
// root ParameterArchive, runtime/schema/parameters.fbs) differ in identifier, root table and
// schema version; a ContainerFormat says which, and where the root keeps the fields they share,
// so that one writer (ContainerWriter.h) and one reader (ContainerReader.h) serve both.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/schema/parameters_generated.h"

#include <cstdint>

namespace dlm::artifact {

// The parameter file's schema version, counted apart from the artifact's (its first is 1.0).
// 1.1: ParameterArchive.random_seed (generated weights, dlm-params random).
inline constexpr uint16_t kParameterSchemaMajor = 1;
inline constexpr uint16_t kParameterSchemaMinor = 1;

struct ContainerFormat {
  // What the file is called in messages: "artifact", "parameter file".
  const char *noun;
  // The generated function returning the file identifier ("DLM1", "DLP1").
  const char *(*identifier)();
  uint16_t schemaMajor;
  uint16_t schemaMinor;
  // The first minor version that records integrity hashes (Weight.content_hash, metadata_hash).
  uint16_t firstMinorWithHashes;
  // The root table's fields both files have, by vtable offset.
  flatbuffers::voffset_t schemaVersionField;
  flatbuffers::voffset_t weightsField;
  flatbuffers::voffset_t weightSectionOffsetField;
  flatbuffers::voffset_t weightSectionSizeField;
  flatbuffers::voffset_t metadataHashField;
};

inline constexpr ContainerFormat kArtifactContainer = {
    "artifact",
    &fb::ArtifactIdentifier,
    kSchemaMajor,
    kSchemaMinor,
    kFirstMinorWithHashes,
    fb::Artifact::VT_SCHEMA_VERSION,
    fb::Artifact::VT_WEIGHTS,
    fb::Artifact::VT_WEIGHT_SECTION_OFFSET,
    fb::Artifact::VT_WEIGHT_SECTION_SIZE,
    fb::Artifact::VT_METADATA_HASH};

inline constexpr ContainerFormat kParameterFileContainer = {
    "parameter file",
    &fb::ParameterArchiveIdentifier,
    kParameterSchemaMajor,
    kParameterSchemaMinor,
    /*firstMinorWithHashes=*/0,
    fb::ParameterArchive::VT_SCHEMA_VERSION,
    fb::ParameterArchive::VT_WEIGHTS,
    fb::ParameterArchive::VT_WEIGHT_SECTION_OFFSET,
    fb::ParameterArchive::VT_WEIGHT_SECTION_SIZE,
    fb::ParameterArchive::VT_METADATA_HASH};

} // namespace dlm::artifact
