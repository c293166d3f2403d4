// Files a program is writing and would leave half-written if it ended on a signal: their paths
// are kept in fixed slots a signal handler can read (no allocation, no lock), so the handler that
// ends the process (MappedFile::exitOnUnguardedFault) can remove them first.
#pragma once

#include <string>

namespace dlm {

// Remembers `path` for removal when the process ends on a signal; false when every slot is taken
// or the path is too long to keep (the file is then only removed the normal way).
bool registerTemporaryFile(const std::string &path);
// Forgets `path` (renamed into place or removed the normal way).
void unregisterTemporaryFile(const std::string &path);
// Unlinks every registered file. Async-signal-safe.
void removeTemporaryFiles();

} // namespace dlm
