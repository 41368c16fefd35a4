"""The browser tests share the claim page's fixtures: headless Chromium
(``browser``) and the app under uvicorn with a fake X (``live``)."""

from tests.browser.test_claim_page import browser, live  # noqa: F401 - fixtures used by name
