//! The router page's and the widget's URL fragment: any text reads into a
//! form, validates or names its bad fields, and writes back losslessly.
#![no_main]
use bench::page::RouterForm;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|fragment: &str| {
    for defaults in [RouterForm::default(), RouterForm::widget_default()] {
        let (form, _unknown) = RouterForm::from_fragment_over(defaults.clone(), fragment);
        let _ = form.protocol();
        let again = RouterForm::from_fragment_over(defaults.clone(), &form.to_fragment_against(&defaults)).0;
        assert_eq!(again, form, "the fragment codec lost text");
    }
});
