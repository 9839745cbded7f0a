# lit configuration for Tally's tool tests.
import os
import lit.formats

config.name = "Tally"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".ptx", ".test", ".cu"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tally_obj_root, "test", "lit")

config.environment["PATH"] = os.pathsep.join(
    [config.tally_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
config.substitutions.append(("%python", config.python))
# The repository's scripts and its committed GPU results (real runs, the
# inputs of the scripts' tests).
config.substitutions.append(("%scripts", os.path.join(config.tally_src_root, "scripts")))
config.substitutions.append(("%results", os.path.join(config.tally_src_root, "docs", "results")))
config.substitutions.append(("%corpus", os.path.join(
    os.path.dirname(config.tally_src_root), "shared", "corpus", "ptx")))

if config.ptxas and os.path.exists(config.ptxas):
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", config.ptxas))
fatbinary = os.path.join(os.path.dirname(config.ptxas or ""), "fatbinary")
if config.ptxas and os.path.exists(fatbinary):
    config.available_features.add("fatbinary")
    config.substitutions.append(("%fatbinary", fatbinary))
nvcc = os.path.join(os.path.dirname(config.ptxas or ""), "nvcc")
if config.ptxas and os.path.exists(nvcc):
    config.available_features.add("nvcc")
    config.substitutions.append(("%nvcc", nvcc))
if os.path.isdir(os.path.join(os.path.dirname(config.tally_src_root), "shared", "corpus")):
    config.available_features.add("corpus")
