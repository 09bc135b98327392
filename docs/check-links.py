"""Checks the built book's internal links: every relative link or image in
its pages names a file that exists in the book, and every #anchor an id
on that page. Also checks that README.md's relative links name files of
the repository (GitHub shows them; the book does not hold the README).

Usage: check-links.py BOOK_DIR README.md
Prints one line per broken link and exits 1 if there is any."""

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

# mdBook's print page repeats every chapter in one file, with ids that
# collide across chapters; the chapters themselves are what is checked. The
# 404 page links to the site's root, which only a web server knows.
SKIPPED_PAGES = {"print.html", "404.html"}


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = set()
        self.links = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if attrs.get(key):
                self.ids.add(attrs[key])
        for key in ("href", "src"):
            if attrs.get(key) is not None:
                self.links.append(attrs[key])


def external(link):
    parts = urlsplit(link)
    return bool(parts.scheme) or link.startswith("//")


def check_book(book):
    pages = {}
    for path in sorted(book.rglob("*.html")):
        page = Page()
        page.feed(path.read_text(encoding="utf-8"))
        pages[path.resolve()] = page
    broken = []
    for path, page in pages.items():
        if path.name in SKIPPED_PAGES:
            continue
        for link in page.links:
            if external(link):
                continue
            parts = urlsplit(link)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            where = path.relative_to(book.resolve())
            if book.resolve() not in target.parents and target != book.resolve():
                broken.append(f"{where}: {link} leaves the book")
            elif not target.exists():
                broken.append(f"{where}: {link}: no such file")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else set()
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where}: {link}: no #{parts.fragment} there")
    return broken, len(pages)


def check_readme(readme):
    broken = []
    text = readme.read_text(encoding="utf-8")
    # Inline links outside code spans and fences; enough for the README.
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
        if external(link) or link.startswith("#"):
            continue
        target = readme.parent / unquote(urlsplit(link).path)
        if not target.exists():
            broken.append(f"{readme.name}: {link}: no such file")
    return broken


def main():
    book, readme = Path(sys.argv[1]), Path(sys.argv[2])
    broken, pages = check_book(book)
    broken += check_readme(readme)
    for line in broken:
        print(line)
    if broken:
        print(f"{len(broken)} broken link(s)", file=sys.stderr)
        sys.exit(1)
    print(f"links: {pages} pages and {readme.name} checked, none broken", file=sys.stderr)


if __name__ == "__main__":
    main()
