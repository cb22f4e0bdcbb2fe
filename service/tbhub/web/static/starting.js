// The "starting" page reloads itself until the board answers. A <meta http-equiv=refresh>
// to the same URL is a same-document navigation in Chromium when the URL has a fragment
// (TensorBoard's #timeseries, #scalars&regexInput=...), so it would never reload; a script
// reload keeps the fragment and does reload. The meta refresh stays for browsers without JS.
window.setTimeout(function () { window.location.reload(); }, 2000);
