"""moto's S3 server, one request at a time.

moto checks an S3 precondition (If-Match, If-None-Match) and then writes,
as two steps with no lock between them: requests served at the same time
can each pass the check before either writes. Served one at a time, each
request sees every write before it, as S3's own conditional writes do.

Usage: python3 moto_serial.py PORT BUCKET (moto importable, e.g. from
PYTHONPATH). Listens on 127.0.0.1:PORT, with BUCKET created.
"""

import sys
import threading

from werkzeug.serving import run_simple
from werkzeug.test import Client

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app


class OneAtATime:
    """A WSGI app that lets one request at a time into `app`, its answer
    read whole before the next request goes in."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        with self.lock:
            answer = self.app(environ, start_response)
            try:
                return [b"".join(answer)]
            finally:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()


def main():
    port, bucket = int(sys.argv[1]), sys.argv[2]
    app = OneAtATime(DomainDispatcherApplication(create_backend_app))
    created = Client(app).put(
        f"/{bucket}",
        headers={"Host": f"127.0.0.1:{port}", "Authorization": "AWS4-HMAC-SHA256 Credential=test/20250101/us-east-1/s3/aws4_request"},
    )
    if created.status_code != 200:
        sys.exit(f"creating bucket {bucket}: {created.status}\n{created.get_data(as_text=True)}")
    run_simple("127.0.0.1", port, app, threaded=True)


if __name__ == "__main__":
    main()
