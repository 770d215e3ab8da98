#!/usr/bin/env python3
"""test_source_paths.py - every path of the tree that the tree's own text names exists: comments,
docstrings, build files and docs that say "ops/cuda/softmax.cu" or "runtime/formats/planfile.h"
point at a file that is there (relative to the source root, or to the naming file's folder), so a
file that moves takes its mentions with it. A path with an X or <...> in it is a pattern, not a
file, and is not checked.

Usage: test_source_paths.py SOURCE_DIR      exit 0: clean; 1: each dangling mention printed
"""
import os
import re
import subprocess
import sys

EXTENSIONS = ('.c', '.h', '.cu', '.cuh', '.cpp', '.py', '.sh', '.txt', '.def', '.md')
TOPS = ('graph', 'ops', 'passes', 'runtime', 'tools', 'tests', 'examples', 'docs')
PATH_RE = re.compile(r'(?<![\w./-])((?:%s)/[\w./-]*\.(?:cuh|cu|cpp|c|h|py|sh|md|def|txt|json))(?!\w)' % '|'.join(TOPS))


def tracked(root):
    """The files git tracks and the untracked ones it does not ignore (a new file counts)."""
    out = subprocess.check_output(['git', 'ls-files', '--cached', '--others', '--exclude-standard'], cwd=root, text=True)
    return sorted(set(f for f in out.split('\n') if f.endswith(EXTENSIONS) and os.path.isfile(os.path.join(root, f))))


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else '.')
    bad, seen = [], 0
    for f in tracked(root):
        with open(os.path.join(root, f), errors='replace') as fh:
            for lineno, line in enumerate(fh, 1):
                for m in PATH_RE.finditer(line):
                    p = m.group(1).rstrip('.')
                    if 'X' in os.path.basename(p).split('.')[0] or '<' in p:
                        continue
                    seen += 1
                    if not (os.path.exists(os.path.join(root, p)) or os.path.exists(os.path.join(root, os.path.dirname(f), p))):
                        bad.append('%s:%d: names %s, which is not in the tree' % (f, lineno, p))
    for b in bad:
        print(b)
    print('test_source_paths: %d mentions of tree paths checked, %d dangling' % (seen, len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
