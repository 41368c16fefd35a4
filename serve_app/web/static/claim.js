// The claim page: sign in or sign up, then submit the X post's URL. Every
// request is fetch with a JSON body (the API refuses cookie-signed writes
// that are not JSON); every message is shown with textContent, never as HTML.
"use strict";

(function () {
  const status = document.getElementById("status");
  const claimForm = document.getElementById("claim-form");
  if (!status || !claimForm) {
    return; // claimed or deactivated: nothing to do on this page
  }
  const claimSubmit = document.getElementById("claim-submit");
  const tweetUrl = document.getElementById("tweet-url");
  const signedIn = document.getElementById("signed-in");
  const signedInName = document.getElementById("signed-in-name");
  const signout = document.getElementById("signout");
  const signin = document.getElementById("signin-form");

  function say(text, kind) {
    status.textContent = text;
    status.dataset.kind = kind;
  }

  // POST a JSON body; resolves to {ok, message, data} whatever happens.
  async function postJson(url, body) {
    let response;
    try {
      response = await fetch(url, {
        method: "POST",
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

  function showSignedIn(human) {
    if (signin) {
      signin.hidden = true;
    }
    signedInName.textContent = human.display_name;
    signedInName.href = "/users/" + encodeURIComponent(human.username);
    signedIn.hidden = false;
    claimSubmit.disabled = false;
  }

  if (signin) {
    const nameField = document.getElementById("signin-name-field");
    const name = document.getElementById("signin-name");
    const email = document.getElementById("signin-email");
    const password = document.getElementById("signin-password");
    const submit = document.getElementById("signin-submit");
    const toggle = document.getElementById("signin-toggle");

    toggle.addEventListener("click", function () {
      const signup = signin.dataset.mode !== "signup";
      signin.dataset.mode = signup ? "signup" : "login";
      nameField.hidden = !signup;
      name.required = signup;
      password.autocomplete = signup ? "new-password" : "current-password";
      submit.textContent = signup ? "Create account" : "Sign in";
      toggle.textContent = signup ? "Have an account? Sign in" : "New to Cairn? Create an account";
    });

    signin.addEventListener("submit", async function (event) {
      event.preventDefault();
      const signup = signin.dataset.mode === "signup";
      const body = { email: email.value.trim(), password: password.value };
      if (signup) {
        body.name = name.value.trim();
      }
      submit.disabled = true;
      say(signup ? "Creating your account…" : "Signing in…", "busy");
      const result = await postJson(signup ? "/api/humans/register" : "/api/humans/login", body);
      submit.disabled = false;
      if (!result.ok || !result.data) {
        say(result.message, "error");
        return;
      }
      password.value = "";
      showSignedIn(result.data);
      say(signup ? "Account created; you are signed in." : "Signed in.", "success");
      tweetUrl.focus();
    });
  }

  signout.addEventListener("click", async function () {
    const result = await postJson("/api/humans/logout", {});
    if (result.ok) {
      window.location.reload();
    } else {
      say(result.message, "error");
    }
  });

  claimForm.addEventListener("submit", async function (event) {
    event.preventDefault();
    const url = tweetUrl.value.trim();
    if (!url) {
      say("Paste the address of your post on X first.", "error");
      return;
    }
    claimSubmit.disabled = true;
    say("Checking your post on X…", "busy");
    const result = await postJson(
      "/api/agents/claim/" + encodeURIComponent(claimForm.dataset.agentId),
      { tweet_url: url },
    );
    if (result.ok) {
      document.getElementById("claim-steps").hidden = true;
      say(result.message, "success");
    } else {
      claimSubmit.disabled = false;
      say(result.message, "error");
    }
  });
})();
