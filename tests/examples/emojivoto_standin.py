#!/usr/bin/python3.11
"""Small services of our own for emojivoto's four roles, plain HTTP behind the mesh sidecars.

Upstream's images cannot be pulled here, so the cluster test runs these in their place, with the
examples' YAML as it is: the same ports and environment (`GRPC_PORT`, `WEB_PORT`, `EMOJISVC_HOST`,
`VOTINGSVC_HOST`, `WEB_HOST`). The role is the program's name, as the images install it:
`emojivoto-emoji-svc` lists emojis, `emojivoto-voting-svc` counts votes, `emojivoto-web` serves
the API and asks the other two, `emojivoto-vote-bot` votes through web every second and prints
each answer and the leaderboard. The standard library only: the images are the release images'
Python base and this file.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EMOJIS = [":joy:", ":sunglasses:", ":doughnut:", ":rocket:", ":100:"]
Route = Callable[[dict[str, list[str]]], tuple[int, object]]


def serve(port: int, routes: dict[str, Route]) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            route = routes.get(url.path)
            status, body = (
                (404, {"error": url.path})
                if route is None
                else route(urllib.parse.parse_qs(url.query))
            )
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            print(f"{self.address_string()} {format % args}", flush=True)

    print(f"listening on :{port}", flush=True)
    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()


def get(host: str, path: str) -> object:
    with urllib.request.urlopen(f"http://{host}{path}", timeout=10) as answer:
        return json.loads(answer.read())


def emoji_svc() -> None:
    serve(int(os.environ["GRPC_PORT"]), {"/list": lambda _: (200, EMOJIS)})


def voting_svc() -> None:
    votes: dict[str, int] = {}
    lock = threading.Lock()

    def vote(query: dict[str, list[str]]) -> tuple[int, object]:
        choice = query.get("choice", [""])[0]
        with lock:
            votes[choice] = votes.get(choice, 0) + 1
        return 200, {"voted": choice}

    serve(int(os.environ["GRPC_PORT"]), {"/vote": vote, "/leaderboard": lambda _: (200, votes)})


def web() -> None:
    emoji, voting = os.environ["EMOJISVC_HOST"], os.environ["VOTINGSVC_HOST"]

    def vote(query: dict[str, list[str]]) -> tuple[int, object]:
        choice = query.get("choice", [""])[0]
        if choice not in get(emoji, "/list"):  # type: ignore[operator]
            return 400, {"error": f"unknown emoji {choice}"}
        return 200, get(voting, f"/vote?choice={urllib.parse.quote(choice)}")

    serve(
        int(os.environ["WEB_PORT"]),
        {
            "/api/list": lambda _: (200, get(emoji, "/list")),
            "/api/vote": vote,
            "/api/leaderboard": lambda _: (200, get(voting, "/leaderboard")),
        },
    )


def vote_bot() -> None:
    host = os.environ["WEB_HOST"]
    round_ = 0
    while True:
        try:
            emojis = get(host, "/api/list")
            assert isinstance(emojis, list)
            choice = emojis[round_ % len(emojis)]
            answer = get(host, f"/api/vote?choice={urllib.parse.quote(choice)}")
            board = get(host, "/api/leaderboard")
            print(f"voted {choice}: {json.dumps(answer)} leaderboard {json.dumps(board)}",
                  flush=True)  # fmt: skip
            round_ += 1
        except (OSError, ValueError, AssertionError) as error:
            print(f"vote failed: {error}", flush=True)
        time.sleep(1)


ROLES = {
    "emojivoto-emoji-svc": emoji_svc,
    "emojivoto-voting-svc": voting_svc,
    "emojivoto-web": web,
    "emojivoto-vote-bot": vote_bot,
}

if __name__ == "__main__":
    ROLES[os.path.basename(sys.argv[0])]()
