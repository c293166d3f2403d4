// dlm-tblgen: mlir-tblgen with dlm's generators (DecodeRecordSpecGen.cpp, GenerateOpsGen.cpp,
// KernelRecordSpecGen.cpp), as IREE's iree-tblgen adds its VM op table to MLIR's.
#include "mlir/Tools/mlir-tblgen/MlirTblgenMain.h"

int main(int argc, char **argv) { return mlir::MlirTblgenMain(argc, argv); }
