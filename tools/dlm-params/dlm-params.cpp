// dlm-params: parameter files (.dlmp) without the compiler.
//
//   dlm-params random MODEL.dlm [-o PATH]   write the parameter file of an artifact compiled with
//                                           `dlmc compile --parameters external
//                                           --random-parameters SEED`: its weights generated
//                                           from the seed it records, matching the hashes dlmc
//                                           recorded (default path: where the artifact looks)
//   dlm-params list FILE.dlmp               its weights: names, dtypes, shapes, sizes, seed
//
// A model's weights need not travel to be timed: carry the small artifact, write its weights
// where it runs. The file is streamed to disk as it is generated (a few MiB resident whatever
// its size). Bad arguments: exit status 2; a failure: 1.
#include "runtime/artifact/ParameterFilePath.h"
#include "runtime/artifact/ParameterFileReader.h"
#include "runtime/artifact/RandomParameterFile.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace dlm::artifact;

constexpr int kBadArguments = 2;
constexpr int kFailed = 1;

const char *kUsage =
    "usage: dlm-params random MODEL.dlm [-o PATH]   write the parameter file of an artifact\n"
    "                                               compiled with --random-parameters SEED\n"
    "       dlm-params list FILE.dlmp               list a parameter file's weights\n";

int badArguments(const std::string &message) {
  std::cerr << "dlm-params: " << message << "\n" << kUsage;
  return kBadArguments;
}

int failed(const dlm::Status &status) {
  std::cerr << "dlm-params: " << status.message() << "\n";
  return kFailed;
}

double peakRssMiB() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    return 0;
  return static_cast<double>(usage.ru_maxrss) / 1024.0; // Linux reports KiB
}

struct Arguments {
  std::string command;
  std::string input;
  std::optional<std::string> output;
};

// Returns 0 when the arguments are good, -1 after --help, else the exit status.
int parseArguments(int argc, char **argv, Arguments &arguments) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--help" || argument == "-h") {
      std::cout << kUsage;
      return -1;
    }
    if (argument == "-o") {
      if (i + 1 == argc)
        return badArguments("-o needs a path");
      arguments.output = argv[++i];
    } else if (argument.size() > 1 && argument[0] == '-') {
      return badArguments("unknown option " + argument);
    } else {
      positional.push_back(argument);
    }
  }
  if (positional.size() != 2)
    return badArguments("give a command and one file");
  arguments.command = positional[0];
  arguments.input = positional[1];
  if (arguments.command != "random" && arguments.command != "list")
    return badArguments("unknown command '" + arguments.command + "' (expected random or list)");
  if (arguments.output && arguments.command != "random")
    return badArguments("-o goes with random");
  return 0;
}

int writeRandom(const std::string &artifact, const std::optional<std::string> &output) {
  dlm::StatusOr<ExternalWeightIndex> index = readExternalWeightIndex(artifact);
  if (!index)
    return failed(index.status());
  const std::string path = output.value_or(index->path);
  const auto start = std::chrono::steady_clock::now();
  dlm::StatusOr<RandomParameterFileOutcome> outcome = writeRandomParameterFile(path, *index);
  if (!outcome)
    return failed(outcome.status());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("dlm-params: wrote %s: %zu weights, random (seed %lld), %llu bytes in %.2f s "
              "(%.2f GB/s, peak RSS %.0f MiB)\n",
              path.c_str(), outcome->weightCount, static_cast<long long>(index->randomSeed),
              static_cast<unsigned long long>(outcome->fileSize), seconds,
              seconds > 0 ? static_cast<double>(outcome->fileSize) / seconds / 1e9 : 0.0,
              peakRssMiB());
  if (!sameFilePath(path, index->path))
    std::printf("dlm-params: the artifact looks for it at %s\n", index->path.c_str());
  if (!outcome->metadataAsRecorded)
    std::printf("dlm-params: its metadata hashes otherwise than dlmc recorded (flatbuffers built "
                "differently?): dlmc inspect will call it rewritten; the weights are the "
                "artifact's\n");
  return 0;
}

int list(const std::string &path) {
  dlm::StatusOr<ParameterFileReader> file = ParameterFileReader::open(path);
  if (!file)
    return failed(file.status());
  uint64_t bytes = 0;
  for (const WeightView &weight : file->weights())
    bytes += weight.size;
  std::printf("parameter file %s (%llu bytes, schema %u.%u, by %.*s)\n", path.c_str(),
              static_cast<unsigned long long>(file->fileSize()), file->schemaVersion().major,
              file->schemaVersion().minor, static_cast<int>(file->producer().size()),
              file->producer().data());
  if (file->randomSeed() >= 0)
    std::printf("weights: %zu tensors, %llu bytes, random (seed %lld)\n", file->weights().size(),
                static_cast<unsigned long long>(bytes),
                static_cast<long long>(file->randomSeed()));
  else
    std::printf("weights: %zu tensors, %llu bytes\n", file->weights().size(),
                static_cast<unsigned long long>(bytes));
  for (const WeightView &weight : file->weights())
    std::printf("  %.*s  %s %s  %llu bytes\n", static_cast<int>(weight.name.size()),
                weight.name.data(), dtypeName(weight.dtype), weight.shape.toString().c_str(),
                static_cast<unsigned long long>(weight.size));
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Arguments arguments;
  if (int status = parseArguments(argc, argv, arguments))
    return status < 0 ? 0 : status;
  if (arguments.command == "random")
    return writeRandom(arguments.input, arguments.output);
  return list(arguments.input);
}
