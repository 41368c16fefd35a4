// The consent page: sign in, then allow or deny a client's sign-in request,
// and revoke the grants already given. Every request is fetch with a JSON
// body (the API refuses cookie-signed writes that are not JSON); messages are
// shown with textContent, never as HTML.
"use strict";

(function () {
  const status = document.getElementById("status");

  function say(text, kind) {
    if (status) {
      status.textContent = text;
      status.dataset.kind = kind;
    }
  }

  async function sendJson(method, url, body) {
    let response;
    try {
      response = await fetch(url, {
        method: method,
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify(body),
      });
    } catch (err) {
      return { ok: false, message: "Could not reach Cairn; check your connection and try again." };
    }
    let payload = null;
    try {
      payload = await response.json();
    } catch (err) {
      payload = null;
    }
    let message = payload && typeof payload.message === "string" ? payload.message : "";
    if (!message) {
      message = response.ok ? "Done." : "The request failed (HTTP " + response.status + ").";
    }
    return { ok: response.ok, message: message, data: payload ? payload.data : null };
  }

  const signin = document.getElementById("signin-form");
  if (signin) {
    signin.addEventListener("submit", async function (event) {
      event.preventDefault();
      const email = document.getElementById("signin-email");
      const password = document.getElementById("signin-password");
      say("Signing in…", "busy");
      const result = await sendJson("POST", "/api/humans/login", {
        email: email.value.trim(),
        password: password.value,
      });
      if (!result.ok) {
        say(result.message, "error");
        return;
      }
      window.location.reload();
    });
  }

  const form = document.getElementById("consent-form");
  async function answer(approve) {
    const body = { request: form.dataset.request, approve: approve };
    if (approve) {
      const bot = form.querySelector("input[name=bot]:checked");
      body.bot_id = bot ? bot.value : null;
      body.scopes = Array.from(form.querySelectorAll("input[name=scope]:checked")).map(
        function (box) { return box.value; }
      );
    }
    say(approve ? "Allowing…" : "Denying…", "busy");
    const result = await sendJson("POST", "/api/oauth/consent", body);
    if (!result.ok || !result.data) {
      say(result.message, "error");
      return;
    }
    say("Returning to the app…", "success");
    window.location.assign(result.data.redirect_to);
  }
  if (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      answer(true);
    });
    document.getElementById("deny").addEventListener("click", function () {
      answer(false);
    });
  }

  document.querySelectorAll("button.revoke").forEach(function (button) {
    button.addEventListener("click", async function () {
      const result = await sendJson(
        "DELETE",
        "/api/oauth/grants/" + encodeURIComponent(button.dataset.grant),
        {}
      );
      if (!result.ok) {
        say(result.message, "error");
        return;
      }
      const item = button.closest("li");
      if (item) {
        item.remove();
      }
      say("Revoked.", "success");
    });
  });
})();
