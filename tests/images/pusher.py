"""Push test images to a registry with the distribution API (monolithic blob uploads).

POST /v2/<name>/blobs/uploads/ opens an upload, PUT <location>?digest=… finishes it with the whole
blob, PUT /v2/<name>/manifests/<reference> stores a manifest (OCI distribution spec, "Push").
"""

from __future__ import annotations

import base64
import http.client
from urllib.parse import urlencode, urlsplit

from tests.images.imagebuild import Blob, Image, ImageIndex


class Pusher:
    def __init__(self, host: str, auth: tuple[str, str] | None = None) -> None:
        self.host = host
        self._headers: dict[str, str] = {}
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"

    def _request(
        self, method: str, target: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> http.client.HTTPResponse:
        connection = http.client.HTTPConnection(self.host, timeout=30)
        connection.request(method, target, body=body, headers={**self._headers, **(headers or {})})
        response = connection.getresponse()
        response.read()
        connection.close()
        return response

    def blob(self, repository: str, blob: Blob) -> None:
        response = self._request("POST", f"/v2/{repository}/blobs/uploads/")
        assert response.status == 202, response.status
        location = urlsplit(response.getheader("Location") or "")
        query = f"{location.query}&" if location.query else ""
        target = f"{location.path}?{query}{urlencode({'digest': blob.digest})}"
        response = self._request(
            "PUT", target, blob.data, {"Content-Type": "application/octet-stream"}
        )
        assert response.status == 201, response.status

    def manifest(self, repository: str, reference: str, manifest: Blob) -> None:
        response = self._request(
            "PUT",
            f"/v2/{repository}/manifests/{reference}",
            manifest.data,
            {"Content-Type": manifest.media_type},
        )
        assert response.status == 201, response.status

    def image(self, repository: str, tag: str | None, item: Image | ImageIndex) -> None:
        """Push blobs, then manifests (members of an index by digest), then the tag."""
        members = [member for _, member in item.images] if isinstance(item, ImageIndex) else [item]
        for member in members:
            for blob in member.blobs:
                self.blob(repository, blob)
            self.manifest(repository, member.digest, member.manifest)
        self.manifest(repository, tag or item.digest, item.manifest)
