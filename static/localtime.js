// Times a person reads, in the viewer's own time zone (the server writes UTC, which stays the
// text without JavaScript): each <time datetime="…" data-local="date|clock|seconds|stamp|hover"> gets
// its text in local time (not for "hover") and the exact local time on hover. htmx.onLoad runs
// it on the page and on every part htmx swaps in.
(function () {
  var formats = {
    date: {year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', hourCycle: 'h23', minute: '2-digit', timeZoneName: 'short'},
    clock: {hour: '2-digit', hourCycle: 'h23', minute: '2-digit', timeZoneName: 'short'},
    seconds: {hour: '2-digit', hourCycle: 'h23', minute: '2-digit', second: '2-digit'}
  };
  var exact = {year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', hourCycle: 'h23', minute: '2-digit', second: '2-digit', timeZoneName: 'short'};
  // "stamp": the server's one shape, 2026-11-28 17:50:23 CET, in the viewer's zone.
  function two(n) { return (n < 10 ? '0' : '') + n; }
  function stamp(at) {
    var zone = '';
    try {
      zone = at.toLocaleString('en-GB', {timeZoneName: 'short'}).split(' ').pop();
    } catch (e) { zone = ''; }
    return at.getFullYear() + '-' + two(at.getMonth() + 1) + '-' + two(at.getDate()) + ' ' +
      two(at.getHours()) + ':' + two(at.getMinutes()) + ':' + two(at.getSeconds()) +
      (zone ? ' ' + zone : '');
  }
  function localize(root) {
    var times = root.querySelectorAll ? root.querySelectorAll('time[data-local]') : [];
    Array.prototype.forEach.call(times, function (el) {
      var at = new Date(el.getAttribute('datetime'));
      if (isNaN(at.getTime())) return;
      var how = el.getAttribute('data-local');
      if (how === 'stamp') el.textContent = stamp(at);
      else if (formats[how]) el.textContent = at.toLocaleString(undefined, formats[how]);
      el.title = at.toLocaleString(undefined, exact);
    });
  }
  htmx.onLoad(localize);
})();
