// The _config as the generated rule templates read it: numbers spelled as the catalogue spells them (0.1, not
// 0.10000000000000001; 20000, not 2e+04), each number's percentage (`<name>_pct`, 0.5 as 50%), each selector
// as the braces or the first matchers it adds, and `pick`, the rules of _config.bundle. A value of the wrong
// type, or an unknown bundle, stops the rendering with an error that names its key.
local checked(config, key) =
  local value = config[key];
  if std.isNumber(value) then value
  else error '_config.%s: expected a number, got %s' % [key, std.toString(value)];

// The fewest decimals that read back as the same number, as Python's repr() writes it (the catalogue's spelling),
// by arithmetic while value * 10^places is an exact integer (std.format formats in interpreted jsonnet in the
// C++ jsonnet: far slower, and inexact beyond 15 digits). A number that needs more digits than that (0.1 * 3) is
// spelled with 17 (std.toString): the same number, only longer than repr() writes it.
local decimals(value, places) =
  local scale = std.pow(10, places);
  if std.abs(value) * scale >= std.pow(2, 52) then null
  else if std.round(value * scale) / scale == value then places
  else decimals(value, places + 1);

local fixed(value, places) =
  local digits = std.toString(std.round(std.abs(value) * std.pow(10, places)));
  local padded = std.repeat('0', std.max(0, places + 1 - std.length(digits))) + digits;
  local point = std.length(padded) - places;
  (if value < 0 then '-' else '') + padded[:point] + '.' + padded[point:];

local number(config, key) =
  local value = checked(config, key);
  local places = decimals(value, 1);
  if value == std.floor(value) || places == null then std.toString(value) else fixed(value, places);

local percent(config, key) = '%g%%' % (checked(config, key) * 100);

local text(config, key) =
  local value = config[key];
  if !std.isString(value) || value == '' then
    error '_config.%s: expected a non-empty string, got %s' % [key, std.toString(value)]
  else value;

local selector(config, key) =
  local value = config[key];
  if !std.isString(value) then
    error '_config.%s: expected PromQL matchers as a string, such as \'job="node-exporter"\', got %s'
          % [key, std.toString(value)]
  else {
    [key + '_braces']: if value == '' then '' else '{%s}' % value,
    [key + '_first']: if value == '' then '' else '%s, ' % value,
  };

{
  params(config, numbers, texts, selectors, bundles)::
    { [key]: number(config, key) for key in numbers }
    + { [key + '_pct']: percent(config, key) for key in numbers }
    + { [key]: text(config, key) for key in texts }
    + std.foldl(function(all, key) all + selector(config, key), selectors, {})
    + {
      // The rules of _config.bundle from an object bundle → rules.
      pick(byBundle)::
        if std.member(bundles, config.bundle) then byBundle[config.bundle]
        else error '_config.bundle: %s is not one of %s' % [std.toString(config.bundle), std.join(', ', bundles)],
    },
}
