"""The least a first scan can do, as a plain script: the floor that ``benchmarks/scan.py``
measures orchardist's cold scan against, in the same run.

    python benchmarks/scan_floor.py OUT.sarif GLOB CONFIG SCANNER-ARGV...   (in the repository)

It lists the committed tree (HEAD), exports the files that match ``GLOB`` (fnmatch) and the
scanner's ``CONFIG`` file with git into a scratch folder, runs the scanner there with those
files added to its argv, reads the SARIF it prints, writes its results as one SARIF file and
removes the folder. Nothing else: no plan, no store, no cache, no confinement, no check of the
scanner's work, no summary.
What the steps after the scanner need is imported while it runs.
"""

import os
import subprocess
import sys


def main() -> None:
    out, pattern, config, argv = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    scratch = f"/tmp/scan-floor-{os.getpid()}"
    os.mkdir(scratch)
    env = {**os.environ, "GIT_INDEX_FILE": f"{scratch}/index"}
    listed = subprocess.run(
        ["git", "ls-tree", "-r", "-z", "--name-only", "HEAD"], capture_output=True, check=True
    ).stdout
    from fnmatch import fnmatch

    files = [f for f in listed.decode().split("\0") if f and fnmatch(f, pattern)]
    subprocess.run(["git", "read-tree", "HEAD"], env=env, check=True)
    subprocess.run(
        ["git", "checkout-index", "-z", "--stdin", f"--prefix={scratch}/tree/"],
        input="\0".join([*files, config]).encode(),
        env=env,
        check=True,
    )
    scanner = subprocess.Popen([*argv, *files], cwd=f"{scratch}/tree", stdout=subprocess.PIPE)
    import json  # while the scanner runs
    import shutil

    printed, _ = scanner.communicate()
    if scanner.returncode != 0:
        raise SystemExit(f"the scanner failed ({scanner.returncode})")
    results = json.loads(printed)["runs"][0]["results"]
    with open(out, "w") as fh:
        fh.write(json.dumps({"version": "2.1.0", "runs": [{"results": results}]}))
    shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
