"""The "browser" of the conformance driver (`auth.browser`): what a person's browser does with an authorization URL
when the authorization server approves at once (the suite's does: it redirects straight back with the code).

    python browser.py URL     GET URL without following; GET the redirect's Location (Triad's loopback redirect)
"""

from __future__ import annotations

import sys

import httpx2

if __name__ == "__main__":
    answer = httpx2.get(sys.argv[-1], follow_redirects=False, timeout=10)
    location = answer.headers.get("location")
    if answer.status_code not in (301, 302, 303, 307, 308) or not location:
        sys.exit(f"the authorization server answered {answer.status_code}, not a redirect")
    httpx2.get(location, timeout=10)
