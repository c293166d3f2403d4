#!/usr/bin/env python3
"""The README's architecture and policy lists against what dlmc knows (`dlmc list`): an
architecture the importer takes or refuses by name, or a policy with a decode program, that the
README misses or misplaces, and a name the README gives that dlmc does not know, fail.

    check_readme_lists.py --dlmc build/bin/dlmc [--readme README.md]

The README's "Architectures (`dlmc list architectures`):" paragraph names each imported class in
backticks before "Not supported yet", and each refused one after it; the "Policies (`dlmc list
policies`...)" paragraph names each policy in backticks (flags, in backticks too, start with --).
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def paragraph(text, opening):
    start = text.index(opening)
    end = text.find("\n\n", start)
    return text[start:end if end >= 0 else len(text)]


def listed(dlmc, what):
    out = subprocess.run([dlmc, "list", what], check=True, capture_output=True, text=True).stdout
    return {line.split("\t")[0]: line.split("\t")[1] for line in out.splitlines() if line}


def problems(readme, architectures, policies):
    found = []
    archs = paragraph(readme, "Architectures (`dlmc list architectures`)")
    imported_part, _, refused_part = archs.partition("Not supported yet")
    class_name = re.compile(r"`([A-Z][A-Za-z0-9]+)`")
    imported = set(class_name.findall(imported_part))
    refused = set(class_name.findall(refused_part))
    for name, support in architectures.items():
        where = refused if support == "not supported yet" else imported
        if name not in where:
            found.append(f"README: architecture {name} ({support}) is not listed as such")
    for name in imported | refused:
        if name not in architectures:
            found.append(f"README: architecture {name} is not one dlmc knows")
    pols = paragraph(readme, "Policies (`dlmc list policies`")
    named = set(re.findall(r"`([a-z][a-z0-9]*(?:-[a-z0-9]+)*)`", pols))
    for name in policies:
        if name not in named:
            found.append(f"README: policy {name} is not described")
    for name in named - set(policies):
        found.append(f"README: '{name}' is not a policy dlmc has (or should not be in backticks)")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dlmc", required=True)
    parser.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    args = parser.parse_args()
    with open(args.readme) as f:
        readme = f.read()
    architectures, policies = listed(args.dlmc, "architectures"), listed(args.dlmc, "policies")
    found = problems(readme, architectures, policies)
    # The check must be able to fail: a README without one of each list's names does.
    first_arch, first_policy = next(iter(architectures)), next(iter(policies))
    damaged = readme.replace(f"`{first_arch}`", "").replace(f"`{first_policy}`", "")
    if len(problems(damaged, architectures, policies)) < 2:
        found.append("the check does not notice a name taken out of the README")
    for problem in found:
        print(problem)
    print(f"{len(architectures)} architectures and {len(policies)} policies: "
          + ("the README agrees" if not found else f"{len(found)} problem(s)"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
