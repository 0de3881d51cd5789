// blocklstm/version.h — the one place the project's version is written: CMake's project version,
// the Python package's version and `blocklstm --version` all read it from here.
#pragma once

#define BLOCKLSTM_VERSION "0.1.0"
