"""The runtime description: what a platform's runtime consists of, and the handler that names it.

One type (`model.RuntimeDescription`, frozen dataclasses read from and written to JSON) for every
user: `platforms` names runtime classes with it, `contrast runtime` prints their resources,
`contrast runtime build` (`kata.build`) writes one into the payload it builds, and the node
installer installs exactly the files it pins. `digest` derives the runtime hash from it and from
the installer's source, `runtimes/<platform>.json` are the descriptions shipped with this release.

It sits low (it imports only `errors`) and holds no pydantic: naming a runtime class is part of
every `generate`, and reading a description and hashing it costs less than importing pydantic.
"""
