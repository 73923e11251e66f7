"""Creates a container in an Azure Blob emulator (Azurite), for the tests.

object_store, which the backend uses, has no call that creates a
container, and Azurite takes only signed requests: this signs one
`Create Container` request with the account's shared key.

    python3 azure_container.py http://127.0.0.1:10000 devstoreaccount1 KEY distlock

An existing container is fine; any other answer fails with its status.
"""

import base64
import email.utils
import hashlib
import hmac
import sys
import urllib.error
import urllib.request

API_VERSION = "2021-08-06"


def main() -> int:
    endpoint, account, key, container = sys.argv[1:5]
    date = email.utils.formatdate(usegmt=True)
    # urllib sends a Content-Type with any body, an empty one too: name it,
    # so that it is the one signed.
    content_type = "application/octet-stream"
    # Shared Key's string to sign: the verb, eleven standard headers (all
    # empty here but Content-Type; Content-Length is empty when it is 0),
    # the x-ms- headers, and the resource. Azurite's path-style URLs carry
    # the account in the path, after the account the resource starts with.
    standard = ["", "", "", "", content_type, "", "", "", "", "", ""]
    to_sign = "\n".join(
        ["PUT"]
        + standard
        + [f"x-ms-date:{date}", f"x-ms-version:{API_VERSION}"]
        + [f"/{account}/{account}/{container}", "restype:container"]
    )
    digest = hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()
    request = urllib.request.Request(
        f"{endpoint}/{account}/{container}?restype=container",
        method="PUT",
        data=b"",
        headers={
            "Content-Type": content_type,
            "x-ms-date": date,
            "x-ms-version": API_VERSION,
            "Authorization": f"SharedKey {account}:{base64.b64encode(digest).decode()}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return 0 if answer.status == 201 else fail(answer.status, "")
    except urllib.error.HTTPError as error:
        body = error.read().decode(errors="replace")
        if error.code == 409 and "ContainerAlreadyExists" in body:
            return 0
        return fail(error.code, body)


def fail(status: int, body: str) -> int:
    print(f"creating the container failed: HTTP {status} {body}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
