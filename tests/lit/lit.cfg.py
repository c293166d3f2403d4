# lit configuration of dlm's compiler tests.
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "dlm"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.dlm_binary_dir, "tests", "lit")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in", "Inputs"]

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.dlm_tools_dir, append_path=True)
config.substitutions.append(("%dlm_python", config.python_executable))
config.substitutions.append(("%dlm_src", config.dlm_source_dir))
if config.dlm_have_nvrtc:
    config.available_features.add("nvrtc")
