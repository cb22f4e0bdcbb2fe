// Copy buttons: <button data-copy="ID" hidden> copies the value of the field with that id.
// Without JavaScript the button stays hidden and the field's text can be selected by hand.
"use strict";
(function () {
  function copied(button, text) {
    var status = button.parentNode.querySelector(".copy-status");
    if (status) { status.textContent = text; }
  }
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    var field = document.getElementById(button.getAttribute("data-copy"));
    if (!field) { return; }
    button.hidden = false;
    field.addEventListener("focus", function () { field.select(); });
    button.addEventListener("click", function () {
      field.select();
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(field.value).then(
          function () { copied(button, "Copied."); },
          function () { copied(button, "Copy failed: select the text and copy it by hand."); }
        );
      } else {
        // Plain http on a non-local address has no clipboard API; the selection remains.
        copied(button, "Selected: press Ctrl+C (Cmd+C on a Mac) to copy.");
      }
    });
  });
})();
