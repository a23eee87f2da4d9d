// An expired session in an htmx request (dashboard/expired_session.py answers 401 with the
// sign-in address in X-Sign-In): save the page's forms marked data-keep-through-sign-in to
// sessionStorage and go to sign in once, however many regions asked. Back on the page after
// signing in, the forms get their values again. Secret and hidden fields are never saved.
(function () {
  var PREFIX = 'gpuqueue:kept-form:';
  var leaving = false;

  function key(form) { return PREFIX + location.pathname + '#' + form.id; }

  function keepable(el) {
    if (!el.name || el.disabled) return false;
    var type = (el.type || '').toLowerCase();
    return ['password', 'hidden', 'file', 'submit', 'button'].indexOf(type) < 0 &&
      !el.hasAttribute('data-secret');
  }

  function save(form) {
    var values = {};
    Array.prototype.forEach.call(form.elements, function (el) {
      if (!keepable(el)) return;
      values[el.name] = el.type === 'checkbox' ? el.checked : el.value;
    });
    sessionStorage.setItem(key(form), JSON.stringify(values));
  }

  function restore(form) {
    var text = sessionStorage.getItem(key(form));
    if (text === null) return;
    sessionStorage.removeItem(key(form));
    var values = JSON.parse(text);
    Array.prototype.forEach.call(form.elements, function (el) {
      if (!keepable(el) || !(el.name in values)) return;
      if (el.type === 'checkbox') el.checked = values[el.name];
      else el.value = values[el.name];
    });
    form.dispatchEvent(new Event('change', {bubbles: true}));
  }

  document.addEventListener('htmx:beforeSwap', function (event) {
    var xhr = event.detail.xhr;
    var target = xhr.status === 401 && xhr.getResponseHeader('X-Sign-In');
    if (!target) return;
    event.detail.shouldSwap = false;
    if (leaving) return;
    leaving = true;
    document.querySelectorAll('form[data-keep-through-sign-in]').forEach(save);
    location.assign(target);
  });

  document.addEventListener('DOMContentLoaded', function () {
    document.querySelectorAll('form[data-keep-through-sign-in]').forEach(restore);
  });
})();
