#!/usr/bin/env python3
"""test_doc_links.py - the README and docs/*.md link only to what is in the repository: every
relative link ([text](path) or [text](path#anchor), images included) names a file of the tree, and
an anchor a heading of the target page (GitHub's slugs); none leaves the repository (a clone has
nothing beside it). Links with a scheme (https:, mailto:) are not followed. Code blocks are skipped.

Usage: test_doc_links.py SOURCE_DIR      exit 0: clean; 1: each bad link printed, one a line
"""
import os
import re
import sys

LINK_RE = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
HEADING_RE = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')


def slug(heading):
    """GitHub's anchor of a heading: lower case, code and emphasis marks dropped, links' text kept,
    spaces to '-', other punctuation dropped."""
    h = heading.strip().lower()
    h = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', h)
    h = h.replace('`', '').replace('*', '')
    return ''.join('-' if ch == ' ' else ch for ch in h if ch.isalnum() or ch in '-_ ')


def lines_outside_code(path):
    """(line number, line) of a Markdown file, leaving out fenced code blocks."""
    in_block = False
    with open(path, encoding='utf-8') as f:
        for i, line in enumerate(f, 1):
            if line.startswith('```'):
                in_block = not in_block
                continue
            if not in_block:
                yield i, line


def anchors(path):
    seen, out = {}, set()
    for _, line in lines_outside_code(path):
        m = HEADING_RE.match(line)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else '%s-%d' % (s, n))
    return out


def check(root, rel):
    """The bad links of one page, as messages."""
    bad = []
    for i, line in lines_outside_code(os.path.join(root, rel)):
        for m in LINK_RE.finditer(line):
            target = m.group(1)
            if re.match(r'^[a-z]+:', target):
                continue
            path, _, anchor = target.partition('#')
            page = os.path.join(root, rel)
            full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            where = '%s:%d: %s' % (rel, i, target)
            if not (full + os.sep).startswith(root + os.sep):
                bad.append(where + ': leaves the repository')
            elif not os.path.exists(full):
                bad.append(where + ': no such file')
            elif anchor and (not full.endswith('.md') or anchor not in anchors(full)):
                bad.append('%s: no heading #%s in %s' % (where, anchor, os.path.relpath(full, root)))
    return bad


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else '.')
    pages = ['README.md'] + sorted('docs/' + f for f in os.listdir(os.path.join(root, 'docs')) if f.endswith('.md'))
    bad = [b for p in pages for b in check(root, p)]
    for b in bad:
        print(b)
    print('test_doc_links: %d pages checked, %d bad links' % (len(pages), len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
